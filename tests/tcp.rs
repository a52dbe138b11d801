//! End-to-end TCP runs: a real `fperf -s` and `fperf -c` on loopback, for each flag
//! alone and in combination, asserting both sides' byte counts and report fields.

mod common;
use common::*;
use std::time::{Duration, Instant};

const MB: u64 = 1 << 20;

/// Runs a client with `args` against a fresh server; returns (client, server report).
fn run_pair(host: &str, args: &[&str]) -> (String, String) {
    let server = Server::start(&[]);
    let client = client_ok(&server, host, args);
    let report = server.report(1);
    (client, report)
}

#[test]
fn default_single_stream() {
    let (c, s) = run_pair("127.0.0.1", &["-m", "64"]);
    let first = c.lines().next().unwrap();
    assert!(
        regex::Regex::new(
            r"^TCP CLIENT => 127\.0\.0\.1:\d+ pkt_size=32768B sync\(no-queue\) nsockets=1 cc=[\w-]+ sched=batch$"
        )
        .unwrap()
        .is_match(first),
        "{first}"
    );
    assert_bytes(&c, &s, 64 * MB);
    latency(&c, "latency");
    latency(&s, "latency");
    assert!(
        !c.contains("lat_submit"),
        "sync sending has no lat_submit:\n{c}"
    );
    // The server says where it listens, then the test's header on a line of its own.
    assert!(s.starts_with(" on "), "{s}");
    assert!(s.contains("\nnew TCP connection from 127.0.0.1:"), "{s}");
    assert!(s.contains(". pkt_size(32KB) cc="), "{s}");
    // Client and server time the same transfer: their durations agree.
    let (cs, ss) = (volume(&c, "sent").secs, volume(&s, "received").secs);
    assert!(
        (cs - ss).abs() <= 0.05 + cs * 0.5,
        "client {cs}s vs server {ss}s"
    );
}

#[test]
fn two_streams_use_consecutive_ports_and_report_per_stream() {
    let server = Server::start(&[]);
    let c = client_ok(&server, "127.0.0.1", &["-m", "16", "-t", "2"]);
    let s = server.report(1);
    assert_bytes(&c, &s, 32 * MB);
    for k in 0..2u16 {
        let port = server.port + k;
        assert!(
            c.lines()
                .any(|l| l.starts_with(&format!("TCP STREAM {k} 127.0.0.1:"))
                    && l.contains(&format!("=> 127.0.0.1:{port} "))),
            "stream {k} on port {port}:\n{c}"
        );
        assert!(c.contains(&format!("  stream {k} : avg=")), "{c}");
        assert!(c.contains("sent: 16MB(0.02GB 16777216B)"), "{c}");
        assert!(s.contains(&format!("  stream {k} : avg=")), "{s}");
    }
    assert!(c.contains("\nPer Stream:\n"), "{c}");
}

#[test]
fn four_sockets_send_asynchronously() {
    let (c, s) = run_pair("127.0.0.1", &["-m", "32", "-n", "4"]);
    assert!(
        c.lines()
            .next()
            .unwrap()
            .contains("async(mutex-queue) nsockets=4 cc="),
        "{c}"
    );
    assert_bytes(&c, &s, 32 * MB);
    latency(&c, "latency");
    assert!(has_line(&c, "lat_submit: avg="), "{c}");
    assert!(
        regex::Regex::new(r"lat_submit: avg=\d+ns  min=\d+ns  max=\d+ns")
            .unwrap()
            .is_match(&c),
        "{c}"
    );
}

#[test]
fn lockfree_queue_is_asynchronous_with_one_socket() {
    let (c, s) = run_pair("127.0.0.1", &["-m", "32", "-q", "0"]);
    assert!(
        c.lines()
            .next()
            .unwrap()
            .contains("async(lockfree-queue) nsockets=1 cc="),
        "{c}"
    );
    assert_bytes(&c, &s, 32 * MB);
    assert!(has_line(&c, "lat_submit: avg="), "{c}");
}

#[test]
fn lockfree_queue_forces_one_socket() {
    let server = Server::start(&[]);
    let out = client_run(&server, "127.0.0.1", &["-m", "8", "-q", "0", "-n", "4"]);
    assert!(out.status.success());
    let c = String::from_utf8_lossy(&out.stdout);
    assert!(c.lines().next().unwrap().contains("nsockets=1 cc="), "{c}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("forced to 1"));
}

#[test]
fn mprtt_counts_one_ack_byte_per_packet() {
    let (c, s) = run_pair("127.0.0.1", &["-m", "8", "-r", "-l", "32K"]);
    assert_bytes(&c, &s, 8 * MB);
    // 8 MB in 32 KB packets: 256 ACK bytes.
    assert_eq!(volume(&c, "received").bytes, 256, "{c}");
    latency(&c, "mprtt");
    latency(&s, "mprtt");
    assert!(!has_line(&c, "latency"), "{c}");
}

#[test]
fn mprtt_with_streams_sockets_and_odd_packet_size() {
    // 2 MB is not a whole number of 1000-byte packets: the short last one is ACKed too.
    let (c, s) = run_pair(
        "127.0.0.1",
        &["-m", "2", "-r", "-t", "2", "-n", "3", "-l", "1000"],
    );
    assert_bytes(&c, &s, 4 * MB);
    let packets_per_stream = (2 * MB).div_ceil(1000);
    assert_eq!(volume(&c, "received").bytes, 2 * packets_per_stream, "{c}");
    latency(&c, "mprtt");
    assert!(has_line(&c, "lat_submit: avg="), "{c}");
}

#[test]
fn bulk_with_streams_sockets_and_odd_packet_size_under_the_low_water_mark() {
    // The server's reads wait for bytes to gather (SO_RCVLOWAT: by default a packet or,
    // with a core to spare per stream, 128 KiB); 2 MB is not a whole number of
    // 1000-byte packets, and the bytes short of the mark on any socket must still be
    // read, at end of stream.
    for (streams, lowat) in [
        ("2", None),
        ("1", None),
        ("2", Some("1")),
        ("2", Some("700")),
        ("2", Some("5000")),
    ] {
        let mut args = vec!["-m", "2", "-t", streams, "-n", "3", "-l", "1000"];
        args.extend(lowat.iter().flat_map(|v| ["--rcvlowat", *v]));
        let (c, s) = run_pair("127.0.0.1", &args);
        let streams: u64 = streams.parse().expect("stream count");
        assert_bytes(&c, &s, streams * 2 * MB);
    }
}

#[test]
fn skip_rx_copy_is_named_in_both_reports_and_counts_every_byte() {
    let (c, s) = run_pair("127.0.0.1", &["-m", "4", "-t", "2", "--skip-rx-copy"]);
    assert_bytes(&c, &s, 8 * MB);
    let named = " rx_copy=skipped (the receiving end's reads discard the bytes in the kernel)";
    assert!(c.lines().take(2).all(|l| l.ends_with(named)), "{c}");
    assert!(s.contains(named), "{s}");
}

/// With `-w`, stream 0 connects to a port of its own (base + nstreams), whose listener
/// was sized before it listened, so the handshake's window scale covers the window.
/// (A window past the host's maximum, or whose buffers pass `--max-memory`, the server
/// refuses: tests/reverse.rs.)
#[test]
fn window_is_named_in_both_reports_and_counts_every_byte() {
    let server = Server::start(&[]);
    let runs = [("256K", " window=256KB"), ("2M", " window=2048KB")];
    for (n, (window, named)) in runs.into_iter().enumerate() {
        let c = client_ok(
            &server,
            "127.0.0.1",
            &[
                "-m", "4", "-t", "2", "-n", "2", "-w", window, "--sched", "batch",
            ],
        );
        let s = server.report(n + 1);
        assert_bytes(&c, &s, 8 * MB);
        // The header ends with the data threads' policy (asked for: by default two
        // streams on a 2-CPU host run under the normal one).
        let tail = format!("{named} sched=batch");
        assert!(c.lines().take(2).all(|l| l.ends_with(&tail)), "{c}");
        // The server's reads take up to 128 KiB: its latency is per read.
        assert!(
            s.contains(&format!("{tail} latency=per-read(128KB)\n")),
            "{s}"
        );
        let stream_0 = format!("=> 127.0.0.1:{} ", server.port + 2);
        assert!(
            c.lines().next().is_some_and(|l| l.contains(&stream_0)),
            "{c}"
        );
    }
}

#[test]
fn nodelay_and_quickack() {
    let (c, s) = run_pair("127.0.0.1", &["-m", "4", "-d", "-a", "-r", "-l", "100"]);
    assert_bytes(&c, &s, 4 * MB);
    let acks = (4 * MB).div_ceil(100);
    assert_eq!(volume(&c, "received").bytes, acks, "{c}");
    let (avg, _, _) = latency(&c, "mprtt");
    // With Nagle and delayed ACK off, a 100-byte round trip on loopback is far below
    // the 40 ms delayed-ACK timer.
    assert!(avg < 10_000.0, "mprtt avg {avg}us with -d -a:\n{c}");
}

#[test]
fn bitrate_paces_each_stream() {
    let (c, s) = run_pair("127.0.0.1", &["-m", "4", "-t", "2", "-b", "100M"]);
    assert_bytes(&c, &s, 8 * MB);
    // Pacing only ever slows a run: two streams at 100 Mbit/s stay under 200 Mbit/s.
    let v = volume(&c, "sent");
    let bps = v.bytes as f64 * 8.0 / v.secs;
    assert!(bps <= 200e6 * 1.1, "{bps} bit/s:\n{c}");
}

#[test]
fn a_rate_of_0_is_as_fast_as_possible_as_iperf3s() {
    for udp in [false, true] {
        let mut args = vec!["--time", "0.5", "-b", "0"];
        if udp {
            args.push("-u");
        }
        let doc = run_json(&args);
        assert!(doc["settings"]["rate_bps"].is_null(), "udp {udp}: {doc}");
        // Far more than any pace could have let through in 0.5 s at 1 bit/s.
        assert!(
            json_u64(&doc, &["client", "total", "bytes_sent"]) > 1 << 20,
            "{doc}"
        );
    }
}

#[test]
fn a_rate_below_a_packet_per_test_still_ends_on_time_and_reports_every_interval() {
    // At 30 kbit/s a 32 KiB packet is due every 8.7 s: the pacer's sleep after the
    // first one outlasts the test, and must wake for each interval and at the end.
    let server = Server::start(&[]);
    for proto in [&[][..], &["-u"][..]] {
        let args = [
            proto,
            &["-l", "32K", "--time", "1", "-i", "0.25", "-b", "30k"][..],
        ]
        .concat();
        let started = std::time::Instant::now();
        let c = client_ok(&server, "127.0.0.1", &args);
        let took = started.elapsed();
        let s = server.report(1);
        assert!(
            took < Duration::from_secs(5),
            "{args:?} took {took:?}:\n{c}"
        );
        assert_bytes(&c, &s, 32768);
        // The server read the one packet at once: a span of no time gives no rate.
        assert!(s.contains("32768B) in 0.00s. (bw: n/a)"), "{args:?}:\n{s}");
        let intervals: Vec<&str> = c.lines().filter(|l| l.starts_with('[')).collect();
        assert_eq!(
            intervals.len(),
            4,
            "{args:?}: an interval line each 0.25 s:\n{c}"
        );
        assert!(
            intervals[1..].iter().all(|l| l.contains(" sent: 0B ")),
            "{args:?}: nothing after the first packet:\n{c}"
        );
    }
}

#[test]
fn a_rate_too_slow_for_the_idle_time_out_is_refused_with_the_packet_size_that_fits() {
    refused(
        &["--loopback", "-b", "20k"],
        "a 32768-byte packet goes every 13.1s",
    );
    refused(
        &["-c", "127.0.0.1", "-b", "20k"],
        "at most 22500 bytes (-l)",
    );
    refused(
        &["-c", "127.0.0.1", "-b", "20k", "--idle-timeout", "5"],
        "stops for 5s (--idle-timeout)",
    );
    // A sweep's runs are checked one by one, not its base -l.
    refused(
        &[
            "--loopback",
            "-b",
            "20k",
            "-m",
            "1",
            "--sweep",
            "pktsize=1K,32K",
        ],
        "--sweep pktsize=32768: at -b 20.0Kbit/s",
    );
}

#[test]
fn one_byte_packets() {
    let (c, s) = run_pair("127.0.0.1", &["-m", "1", "-l", "1"]);
    assert!(c.contains("pkt_size=1B"), "{c}");
    assert!(s.contains("pkt_size(1B)"), "{s}");
    assert_bytes(&c, &s, MB);
    let (avg, min, _) = latency(&c, "latency");
    assert!(min > 0.0 && avg > 0.0);
}

#[test]
fn one_megabyte_packets() {
    let (c, s) = run_pair("127.0.0.1", &["-m", "64", "-l", "1048576"]);
    assert!(s.contains("pkt_size(1024KB)"), "{s}");
    assert_bytes(&c, &s, 64 * MB);
}

#[test]
fn ipv6_loopback() {
    let server = Server::start(&[]);
    let c = client_ok(&server, "::1", &["-m", "16"]);
    let s = server.report(1);
    assert!(c.starts_with("TCP CLIENT => [::1]:"), "{c}");
    assert!(s.contains("new TCP connection from [::1]:"), "{s}");
    assert_bytes(&c, &s, 16 * MB);
}

#[test]
fn ipv6_two_streams_with_bind() {
    let server = Server::start(&["-B", "::1"]);
    let c = client_ok(&server, "::1", &["-m", "4", "-t", "2", "-B", "::1"]);
    assert_bytes(&c, &server.report(1), 8 * MB);
}

#[test]
fn ipv4_or_ipv6_alone_with_4_and_6_as_iperf3s() {
    // A server with -4 listens on IPv4 alone; with -6, on IPv6 alone.
    for (flag, served, not_served) in [("-4", "127.0.0.1", "::1"), ("-6", "::1", "127.0.0.1")] {
        let server = Server::start(&[flag]);
        let c = client_ok(&server, served, &["-m", "4", flag]);
        assert_bytes(&c, &server.report(1), 4 * MB);
        let out = client_run(&server, not_served, &["-m", "4"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag}: {err}");
        assert!(err.contains("Connection refused"), "{flag}: {err}");
    }
    // A client with -4 takes a name's IPv4 address.
    let server = Server::start(&[]);
    let c = client_ok(&server, "localhost", &["-m", "4", "-4"]);
    assert!(c.starts_with("TCP CLIENT => 127.0.0.1:"), "{c}");
    // --loopback with -6 runs over ::1.
    let out = run(&["--loopback", "-6", "-m", "4"], Duration::from_secs(60));
    let c = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{c}");
    assert!(c.starts_with("TCP CLIENT => [::1]:"), "{c}");
    assert!(c.contains("new TCP connection from [::1]:"), "{c}");
    // An address of the other family is refused before anything starts.
    refused(
        &["-c", "::1", "-4"],
        "-4 asks for IPv4 alone, and -c ::1 is an IPv6 address",
    );
    refused(
        &["-s", "-6", "-B", "127.0.0.1"],
        "-6 asks for IPv6 alone, and -B 127.0.0.1 is an IPv4 address",
    );
    refused(&["-c", "h", "-4", "-6"], "cannot be used with");
}

#[test]
fn a_one_off_server_serves_one_test_and_exits_with_its_outcome_as_iperf3s_1() {
    use std::io::Write;
    // A connection that never says what it is does not count as the test.
    let mut server = Server::start(&["-1"]);
    let mut stranger = std::net::TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    let _ = stranger.write_all(b"GET / HTTP/1.0\r\n\r\n");
    drop(stranger);
    let c = client_ok(&server, "127.0.0.1", &["-m", "4"]);
    assert_eq!(server.wait_exit(Duration::from_secs(10)), Some(0));
    let s = server.stdout();
    assert_bytes(&c, &s, 4 * MB);
    // It does not say it listens again after the test.
    let last = s.rsplit("Server listening").next().unwrap_or_default();
    assert!(last.contains("connection from 127.0.0.1"), "{s}");
    // A test that fails (here, refused by the server's limit) ends it with status 1.
    let mut server = Server::start(&["-1", "--max-mb", "2"]);
    let out = client_run(&server, "127.0.0.1", &["-m", "4"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(server.wait_exit(Duration::from_secs(10)), Some(1));
    assert!(server.stderr().contains("--max-mb"), "{}", server.stderr());
}

#[test]
fn server_serves_clients_one_after_another() {
    let server = Server::start(&[]);
    for n in 1..=3u64 {
        let m = (n * 3).to_string();
        let c = client_ok(&server, "localhost", &["-m", &m]);
        let s = server.report(n as usize);
        assert_bytes(&c, &s, n * 3 * MB);
    }
}

#[test]
fn combined_flags() {
    let (c, s) = run_pair(
        "127.0.0.1",
        // 4K: -l reads binary suffixes as iperf3 does.
        &["-m", "8", "-t", "2", "-n", "4", "-d", "-a", "-l", "4K"],
    );
    assert_bytes(&c, &s, 16 * MB);
    assert!(
        c.contains("pkt_size=4096B async(mutex-queue) nsockets=4"),
        "{c}"
    );
}

#[test]
fn loopback_mode_prints_both_reports() {
    let port = port_block(12).to_string();
    let out = run(
        &["--loopback", "-m", "16", "-p", &port],
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(volume(&text, "sent").bytes, 16 * MB, "{text}");
    assert_eq!(volume(&text, "received").bytes, 16 * MB, "{text}");
    // The client's report, then the server's on a line of its own, then the end.
    assert!(text.starts_with("TCP CLIENT => 127.0.0.1:"), "{text}");
    assert!(!text.contains("Server listening"), "{text}");
    let client_end = text.find("sent      :").expect("the client's report");
    let server_start = text
        .find("\nServer: new TCP connection from 127.0.0.1:")
        .expect("the server's report");
    assert!(client_end < server_start, "{text}");
    // The server's report ends with what the client saw.
    let last: Vec<&str> = text.trim_end().lines().rev().take(2).collect();
    assert!(last[0].starts_with("client   : sent 16MB"), "{text}");
    assert!(last[1].starts_with("tcp_info"), "{text}");
}

#[test]
fn client_fails_clearly_without_a_server() {
    let port = port_block(12).to_string();
    let out = run(
        &["-c", "127.0.0.1", "-p", &port, "-m", "1"],
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot connect to the fperf server"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn transactions_end_a_request_response_run_after_that_many_round_trips_per_stream() {
    for (workload, extra) in [("-r", &[][..]), ("--echo", &[][..]), ("-r", &["-u"][..])] {
        let mut args = vec![workload, "-l", "100", "-t", "2", "--transactions", "2500"];
        args.extend_from_slice(extra);
        let doc = run_json(&args);
        // Each stream: 2500 requests, each timed as one round trip, each answered.
        assert_eq!(
            json_u64(&doc, &["client", "total", "bytes_sent"]),
            2 * 2500 * 100
        );
        assert_eq!(
            json_u64(&doc, &["client", "total", "send_latency", "count"]),
            5000
        );
        assert_eq!(
            json_u64(&doc, &["server", "total", "bytes_received"]),
            2 * 2500 * 100
        );
        for stream in doc["client"]["streams"].as_array().expect("streams") {
            assert_eq!(stream["figures"]["send_latency"]["count"], 2500, "{args:?}");
        }
        let reply = if workload == "--echo" { 100 } else { 1 };
        assert_eq!(
            json_u64(&doc, &["client", "total", "bytes_received"]),
            5000 * reply
        );
        assert_eq!(doc["settings"]["transactions"], 2500, "{args:?}");
    }
    refused(
        &["-c", "h", "--transactions", "10"],
        "use it with -r, --echo or --crr",
    );
    refused(
        &["-c", "h", "-r", "--transactions", "10", "--time", "1"],
        "cannot be used with",
    );
    refused(
        &["-c", "h", "-r", "--transactions", "10", "-m", "5"],
        "cannot be used with",
    );
    refused(&["-c", "h", "-r", "--transactions", "0"], "--transactions");
    refused(
        &["-c", "h", "-r", "-l", "64M", "--transactions", "20000000"],
        "more than one stream may send",
    );
}

#[test]
fn a_response_size_answers_every_request_with_that_many_bytes() {
    let server = Server::start(&[]);
    // Small replies, and replies of 256 KiB that arrive in many reads.
    for (request, reply, count) in [(100u64, 4096u64, 1000u64), (1000, 256 << 10, 100)] {
        let (l, size, n) = (request.to_string(), reply.to_string(), count.to_string());
        let args = [
            "-r",
            "-l",
            &l,
            "--response-size",
            &size,
            "--transactions",
            &n,
        ];
        let c = client_ok(&server, "127.0.0.1", &args);
        let header = c.lines().next().unwrap_or_default();
        assert!(header.contains(&format!(" reply={reply}B ")), "{c}");
        assert_eq!(volume(&c, "sent").bytes, count * request, "{c}");
        assert_eq!(volume(&c, "received").bytes, count * reply, "{c}");
        assert_eq!(peer_bytes(&c, "received"), count * request, "{c}");
        assert!(
            c.contains(&format!("({count} transactions in ")),
            "one round trip per request:\n{c}"
        );
        latency(&c, "mprtt");
    }
    // Both ends count every request and every reply byte.
    let doc = run_json(&[
        "-r",
        "-l",
        "100",
        "--response-size",
        "4096",
        "-t",
        "2",
        "--transactions",
        "1000",
    ]);
    assert_eq!(doc["settings"]["response_size"], 4096);
    for (end, sent, received) in [
        ("client", 2 * 1000 * 100, 2 * 1000 * 4096),
        ("server", 2 * 1000 * 4096, 2 * 1000 * 100),
    ] {
        assert_eq!(json_u64(&doc, &[end, "total", "bytes_sent"]), sent, "{end}");
        assert_eq!(
            json_u64(&doc, &[end, "total", "bytes_received"]),
            received,
            "{end}"
        );
    }
    assert_eq!(
        json_u64(&doc, &["client", "total", "send_latency", "count"]),
        2000
    );
}

#[test]
fn a_response_size_that_cannot_apply_is_refused() {
    for (args, why) in [
        (&["--response-size", "64"][..], "use it with -r"),
        (&["--crr", "--response-size", "64"][..], "not with --crr"),
        (
            &["--reverse", "--response-size", "64"][..],
            "not with --reverse",
        ),
        (
            &["--echo", "-l", "100", "--response-size", "64"][..],
            "--echo answers each request with itself, -l 100 bytes: --response-size 64 differs",
        ),
        (
            &["-R", "--echo", "-l", "100", "--response-size", "64"][..],
            "--echo answers each request with itself, -l 100 bytes: --response-size 64 differs",
        ),
        (
            &["-r", "--response-size", "0"][..],
            "--response-size must be between 1",
        ),
        (
            &["-u", "-r", "--response-size", "65528"][..],
            "does not fit in one UDP datagram",
        ),
        (
            &[
                "-r",
                "--sweep",
                "l=1,2",
                "--tests",
                "rr",
                "--response-size",
                "4",
            ][..],
            "cannot be used with",
        ),
    ] {
        let mut all = vec!["-c", "127.0.0.1"];
        all.extend_from_slice(args);
        refused(&all, why);
    }
}

#[test]
fn set_mss_holds_both_ends_segments_to_it_as_iperf3s_m() {
    let server = Server::start(&[]);
    for way in [&[][..], &["--reverse"][..]] {
        let mut args = vec!["-m", "4", "-M", "1000", "--json"];
        args.extend_from_slice(way);
        let text = client_ok(&server, "127.0.0.1", &args);
        let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(doc["settings"]["mss"], 1000, "{way:?}");
        // The segment size in force on each end's data connection (less TCP options).
        for side in ["client", "server"] {
            let mss = json_u64(&doc, &[side, "total", "tcp", "mss"]);
            assert!((900..=1000).contains(&mss), "{way:?} {side}: {mss}");
        }
        let moved = if way.is_empty() {
            "bytes_sent"
        } else {
            "bytes_received"
        };
        assert_eq!(json_u64(&doc, &["client", "total", moved]), 4 * MB);
    }
    let report = server.report(1);
    assert!(
        report.contains(" mss=1000 "),
        "the header says so: {report}"
    );
    assert!((900..=1000).contains(&tcp_info_mss(&report)), "{report}");
    // Loopback's own segments are far larger: the figures above are the option's.
    let text = client_ok(&server, "127.0.0.1", &["-m", "4", "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert!(
        json_u64(&doc, &["client", "total", "tcp", "mss"]) > 10_000,
        "{doc}"
    );
    assert!(doc["settings"].get("mss").is_none(), "{doc}");
    refused(&["-c", "127.0.0.1", "-M", "50"], "between 88 and 32767");
    refused(
        &["-c", "127.0.0.1", "-u", "-M", "1000"],
        "--set-mss is a TCP option",
    );
}

#[test]
fn fq_rate_caps_each_data_connections_rate_as_iperf3s() {
    let server = Server::start(&[]);
    let rate = 80e6;
    for way in [&[][..], &["--reverse"][..]] {
        let mut args = vec!["-t", "2", "--time", "1", "--fq-rate", "80M", "--json"];
        args.extend_from_slice(way);
        let text = client_ok(&server, "127.0.0.1", &args);
        let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(doc["settings"]["fq_rate"], 80_000_000, "{way:?}");
        // The sending end's kernel paces each connection; the receiving end sees it.
        let receiver = if way.is_empty() { "server" } else { "client" };
        for i in 0..2 {
            let got = doc[receiver]["streams"][i]["figures"]["received_bits_per_second"]
                .as_f64()
                .expect("a rate");
            assert!(
                (0.8 * rate..=1.15 * rate).contains(&got),
                "{way:?} stream {i}: {got}"
            );
        }
    }
    let report = server.report(1);
    assert!(report.contains(" fq_rate=80.0Mbit/s "), "{report}");
    // iperf3's layout names it where iperf3 does.
    let text = client_ok(
        &server,
        "127.0.0.1",
        &["-m", "2", "--fq-rate", "80M", "--json=iperf3"],
    );
    let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(doc["start"]["fq_rate"], 80_000_000, "{doc}");
    assert_eq!(doc["start"]["test_start"]["fqrate"], 80_000_000, "{doc}");
    // Unpaced, loopback moves far more: the cap above is the option's.
    let text = client_ok(&server, "127.0.0.1", &["--time", "1", "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let free = doc["server"]["total"]["received_bits_per_second"]
        .as_f64()
        .expect("a rate");
    assert!(free > 3.0 * rate, "{free}");
    assert!(doc["settings"].get("fq_rate").is_none(), "{doc}");
    refused(
        &["-c", "127.0.0.1", "-u", "--fq-rate", "1M"],
        "--fq-rate is a TCP option",
    );
    refused(
        &["-c", "127.0.0.1", "--crr", "--fq-rate", "1M"],
        "cannot be used with --fq-rate",
    );
    refused(&["-c", "127.0.0.1", "--fq-rate", "7"], "at least 8 bits/s");
}

/// At a low --fq-rate the kernel sends far slower than a socket takes data: the sender
/// holds only a little unsent, so the test ends about on time, both ways, instead of
/// waiting for megabytes to drain at the paced rate.
#[test]
fn a_run_paced_at_a_low_fq_rate_ends_about_on_time_both_ways() {
    let server = Server::start(&[]);
    let rate = 2e6;
    for way in [&[][..], &["--reverse"][..]] {
        let mut args = vec!["-t", "1", "--time", "1", "--fq-rate", "2M", "--json"];
        args.extend_from_slice(way);
        let started = Instant::now();
        let text = client_ok(&server, "127.0.0.1", &args);
        let took = started.elapsed();
        // Loopback's 64 KB segments make the kernel pace in bursts of 128 KB, so a
        // second moves about one burst more than the rate.
        assert!(took < Duration::from_secs(6), "{way:?}: {took:?}");
        let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let receiver = if way.is_empty() { "server" } else { "client" };
        let got = doc[receiver]["total"]["received_bits_per_second"]
            .as_f64()
            .expect("a rate");
        assert!(
            (0.5 * rate..=3.0 * rate).contains(&got),
            "{way:?}: {got} bit/s"
        );
    }
}

#[test]
fn connect_timeout_bounds_the_wait_for_a_server_that_does_not_answer() {
    // A listener whose accept queue is full: the kernel leaves further handshakes
    // unanswered, as a firewall that drops them would.
    let listener =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().expect("address");
    listener.bind(&any.into()).expect("bind");
    listener.listen(0).expect("listen");
    let addr = listener
        .local_addr()
        .expect("address")
        .as_socket()
        .expect("IP");
    let _queued: Vec<_> = (0..3)
        .filter_map(|_| {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()
        })
        .collect();
    let port = addr.port().to_string();
    for (kind, extra) in [("fperf", None), ("iperf3", Some("--iperf3"))] {
        let mut args = vec!["-c", "127.0.0.1", "-p", &port, "-m", "1"];
        args.extend(["--connect-timeout", "500"]);
        args.extend(extra);
        let t0 = std::time::Instant::now();
        let out = run(&args, Duration::from_secs(30));
        let took = t0.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        let want = format!("the {kind} server at {addr} did not answer within 500 ms");
        assert!(err.contains(&want), "{err}");
        assert!(
            took >= Duration::from_millis(450) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }
    refused(
        &["-s", "--connect-timeout", "5"],
        "--connect-timeout is a client option",
    );
}

#[test]
fn bind_dev_names_the_interface_every_socket_goes_through() {
    // Which link the packets take is measured in a namespace with two (netns_udp.rs);
    // here, that every kind of socket takes the option, and the refusals.
    let server = Server::start(&[]);
    for way in [
        &["-m", "1"][..],
        &["-m", "1", "--reverse"],
        &["-u", "-m", "1", "-b", "100M"],
        &["--crr", "--transactions", "50"],
    ] {
        let mut args = way.to_vec();
        args.extend(["--bind-dev", "lo"]);
        client_ok(&server, "127.0.0.1", &args);
    }
    let out = client_run(&server, "127.0.0.1", &["-m", "1", "--bind-dev", "nosuch0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot send through network interface nosuch0 (--bind-dev)"),
        "{err}"
    );
    refused(&["-s", "--bind-dev", "lo"], "--bind-dev is a client option");
    refused(
        &["-c", "127.0.0.1", "-R", "--bind-dev", "lo"],
        "RDMA's device is -D",
    );
}

#[test]
fn flowlabel_runs_to_an_ipv6_server_and_is_refused_otherwise() {
    // That every data packet carries it is counted on the wire in netns_tos.rs.
    let server = Server::start(&[]);
    for way in [&["-m", "1"][..], &["--crr", "--transactions", "20"]] {
        let mut args = vec!["-L", "12345", "--json"];
        args.extend_from_slice(way);
        let text = client_ok(&server, "::1", &args);
        let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(doc["settings"]["flowlabel"], 12345, "{way:?}");
    }
    let out = client_run(&server, "127.0.0.1", &["-m", "1", "-L", "5"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("-L/--flowlabel is IPv6's, and the server's address 127.0.0.1 is IPv4"),
        "{err}"
    );
    refused(&["-c", "::1", "-L", "0"], "1..=1048575");
    refused(
        &["-c", "::1", "-u", "-L", "5"],
        "--flowlabel is a TCP option",
    );
}

#[test]
fn cport_sends_each_data_socket_from_the_next_port_as_iperf3s() {
    let server = Server::start(&[]);
    let first = port_block(4);
    let cport = first.to_string();
    // Two streams of two sockets: ports first..first+3, stream by stream. Twice in a row:
    // the second run reuses the ports the first closed.
    for run in 0..2 {
        for (proto, way) in [
            ("-u", None),
            ("--nodelay", None),
            ("--nodelay", Some("--reverse")),
        ] {
            let mut args = vec!["-t", "2", "-n", "2", "-m", "2", "--cport", &cport, "--json"];
            args.push(proto);
            args.extend(way);
            let text = client_ok(&server, "127.0.0.1", &args);
            let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
            for (i, expect) in [(0, first), (1, first + 2)] {
                let ours = doc["client"]["streams"][i]["local"].as_str().unwrap_or("");
                let theirs = doc["server"]["streams"][i]["peer"].as_str().unwrap_or("");
                let want = format!("127.0.0.1:{expect}");
                assert_eq!(ours, want, "run {run} {args:?} stream {i}");
                assert_eq!(theirs, want, "run {run} {args:?} stream {i}");
            }
        }
    }
    for (args, why) in [
        (&["-R"][..], "--cport cannot be used with -R"),
        (&["--crr"], "--cport cannot be used with --crr"),
        (&["--flows", "10"], "--cport cannot be used with --flows"),
    ] {
        let mut all = vec!["-c", "127.0.0.1", "--cport", "5000"];
        all.extend_from_slice(args);
        refused(&all, why);
    }
    refused(
        &["-c", "127.0.0.1", "--cport", "65535", "-t", "2"],
        "need ports up to 65536",
    );
    refused(&["-s", "--cport", "5000"], "--cport is a client option");
}

/// The figure at `path` of a JSON document, if it is a number.
fn figure(doc: &serde_json::Value, path: &[&str]) -> Option<u64> {
    path.iter().try_fold(doc, |at, key| at.get(key))?.as_u64()
}

#[test]
fn tcp_info_says_how_fast_the_path_was_and_how_long_the_sender_was_busy() {
    let doc = run_json(&["-m", "256"]);
    let tcp = ["client", "total", "tcp"];
    let at = |key: &str| {
        let path = [&tcp[..], &[key]].concat();
        figure(&doc, &path).unwrap_or_else(|| panic!("no {key} in {doc}"))
    };
    let (min_rtt, srtt) = (at("min_rtt"), at("srtt_us"));
    assert!(min_rtt > 0 && min_rtt <= srtt, "{min_rtt} {srtt}: {doc}");
    assert!(at("delivery_rate") > 0, "{doc}");
    // The kernel counts busy time in its clock's ticks: up to one more than the run.
    let run_us = json_u64(&doc, &["client", "total", "duration_ns"]) / 1000;
    let busy = at("busy_time");
    assert!(
        busy > 0 && busy <= run_us + 10_000,
        "{busy} of {run_us}: {doc}"
    );
    assert!(
        at("rwnd_limited") <= busy && at("sndbuf_limited") <= busy,
        "{doc}"
    );
}

#[test]
fn a_small_receive_window_limits_the_sender_and_the_report_says_so() {
    // 4 KB buffers on both ends: the receiver's window is what holds the sender back.
    let doc = run_json(&["-m", "16", "-w", "4K"]);
    let at = |key: &str| json_u64(&doc, &["client", "total", "tcp", key]);
    let (busy, limited) = (at("busy_time"), at("rwnd_limited"));
    assert!(busy > 0 && limited * 2 > busy, "{limited} of {busy}: {doc}");
    let server = Server::start(&[]);
    let text = client_ok(&server, "127.0.0.1", &["-m", "16", "-w", "4K"]);
    let said = regex::Regex::new(
        r"(?m)^ +mostly limited by the receiver's window \((\d+)% of busy time\)$",
    )
    .expect("regex");
    let share: u32 = said
        .captures(&text)
        .and_then(|c| c[1].parse().ok())
        .unwrap_or_else(|| panic!("no sentence in {text}"));
    assert!((51..=100).contains(&share), "{text}");
}
