//! `--reverse` end to end: real `fperf -s` / `fperf -c` processes on loopback, the server
//! sending and the client receiving.

mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;

const MB: u64 = 1 << 20;

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not an unsigned integer: {v}"))
}

#[test]
fn the_server_sends_and_each_end_reports_its_own_side() {
    let server = Server::start(&[]);
    let client = client_ok(&server, "127.0.0.1", &["--reverse", "-m", "8"]);
    let report = server.report(1);
    assert!(client.contains("reverse (the server sends)"), "{client}");
    assert!(report.contains("reverse (the server sends)"), "{report}");
    // Swapped roles: the client's report is the receiving end's.
    assert_eq!(volume(&client, "received").bytes, 8 * MB);
    assert_eq!(volume(&report, "sent").bytes, 8 * MB);
    assert_eq!(peer_bytes(&client, "sent"), 8 * MB, "what the server saw");
    assert!(!has_line(&client, "sent"), "{client}");
    latency(&client, "latency");
    latency(&report, "latency");
    assert_eq!(server.stderr(), "", "the server logged a client error");
}

#[test]
fn json_of_a_reverse_run_counts_each_ends_bytes_and_time() {
    let server = Server::start(&[]);
    let out = client_ok(
        &server,
        "127.0.0.1",
        &["--reverse", "-t", "2", "-m", "4", "-l", "128K", "--json"],
    );
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    assert_eq!(doc["settings"]["reverse"], true);
    let (c, s) = (&doc["client"], &doc["server"]);
    assert_eq!(u(&c["total"]["bytes_received"]), 8 * MB);
    assert_eq!(u(&c["total"]["bytes_sent"]), 0);
    assert_eq!(u(&s["total"]["bytes_sent"]), 8 * MB);
    assert_eq!(u(&s["total"]["bytes_received"]), 0);
    for side in [c, s] {
        let streams = side["streams"].as_array().expect("streams");
        assert_eq!(streams.len(), 2);
        assert!(u(&side["total"]["duration_ns"]) > 0);
    }
    for st in c["streams"].as_array().expect("streams") {
        assert_eq!(u(&st["figures"]["bytes_received"]), 4 * MB);
        assert!(st["figures"]["recv_latency"]["count"].as_u64() > Some(0));
    }
    // The sender's time runs until the receiver has everything: never shorter than
    // the receiver's first byte to last.
    assert!(u(&s["total"]["duration_ns"]) >= u(&c["total"]["duration_ns"]) / 2);
}

#[test]
fn a_timed_reverse_run_reports_intervals_on_both_ends() {
    let server = Server::start(&[]);
    let client = client_ok(
        &server,
        "127.0.0.1",
        &["--reverse", "--time", "1", "-i", "0.5", "-b", "200M"],
    );
    let report = server.report(1);
    let client_intervals: Vec<&str> = client
        .lines()
        .filter(|l| l.starts_with('[') && !l.contains("] stream "))
        .collect();
    let server_intervals: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with('[') && !l.contains("] stream "))
        .collect();
    assert_eq!(client_intervals.len(), 2, "{client}");
    assert_eq!(server_intervals.len(), 2, "{report}");
    assert!(client_intervals.iter().all(|l| l.contains("] received: ")));
    assert!(server_intervals.iter().all(|l| l.contains("] sent: ")));
    // Paced by the server's sender at 200 Mbit/s for 1 s: whole packets, about 25 MB.
    let got = volume(&client, "received").bytes;
    assert_eq!(got, volume(&report, "sent").bytes);
    assert_eq!(got % 32768, 0);
    assert!((15 * MB..35 * MB).contains(&got), "{got}");
}

#[test]
fn the_servers_limits_hold_its_own_sending() {
    // --max-rate paces what the server sends as it paces what it reads.
    let server = Server::start(&["--max-rate", "80M"]);
    let out = client_ok(&server, "127.0.0.1", &["--reverse", "-m", "5", "--json"]);
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    let secs = u(&doc["server"]["total"]["duration_ns"]) as f64 / 1e9;
    let rate = 5.0 * MB as f64 * 8.0 / secs;
    assert!(rate < 100e6, "{rate} bit/s past an 80 Mbit/s cap");
    // --max-mb refuses a larger test before anything is sent.
    let capped = Server::start(&["--max-mb", "4"]);
    let out = client_run(&capped, "127.0.0.1", &["--reverse", "-m", "8"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("max-mb"),
        "{out:?}"
    );
}

#[test]
fn ctrl_c_on_the_receiving_client_ends_both_reports() {
    let server = Server::start(&[]);
    let text = interrupted_client(
        &server,
        &["--reverse", "--time", "60"],
        Duration::from_millis(1000),
        Duration::from_secs(20),
    );
    assert!(text.contains("what was received before Ctrl-C"), "{text}");
    let received = volume(&text, "received").bytes;
    let report = server.report(1);
    // What was still in flight when the client stopped reading was sent, not received.
    assert!(
        received > 0 && received <= volume(&report, "sent").bytes,
        "{text}\n{report}"
    );
}

#[test]
fn a_reverse_sweep_rows_the_clients_receiving() {
    let server = Server::start(&[]);
    let out = client_ok(&server, "127.0.0.1", &["--reverse", "--sweep", "mb=1,2"]);
    let rows: Vec<Vec<f64>> = out
        .lines()
        .skip(1)
        .map(|l| {
            l.split_whitespace()
                .map(|c| c.parse().expect("a number"))
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    for (row, mb) in rows.iter().zip([1.0, 2.0]) {
        assert_eq!(row[0], mb);
        assert!(row[1] > 0.0, "bandwidth received: {out}");
        // Reads of up to 128 KiB: at least one per 128 KiB received.
        assert!(row[8] >= mb * 8.0, "reads timed: {out}");
    }
}

#[test]
fn a_reverse_udp_run_counts_the_clients_datagrams_and_loss() {
    let server = Server::start(&[]);
    // Paced, so loopback loses nothing: every datagram the server sent arrives.
    let out = client_ok(
        &server,
        "127.0.0.1",
        &[
            "-u",
            "--reverse",
            "-t",
            "2",
            "-m",
            "4",
            "-l",
            "1024",
            "-b",
            "400M",
            "--json",
        ],
    );
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    let (c, s) = (&doc["client"]["total"], &doc["server"]["total"]);
    let datagrams = 2 * 4 * 1024;
    assert_eq!(u(&s["bytes_sent"]), 8 * MB);
    assert_eq!(u(&s["datagrams"]["sent"]), datagrams);
    assert_eq!(u(&c["bytes_received"]), 8 * MB);
    assert_eq!(u(&c["bytes_sent"]), 0);
    let d = &c["datagrams"];
    assert_eq!(
        u(&d["peer_sent"]),
        datagrams,
        "the server's count reached the client"
    );
    assert_eq!(u(&d["received"]), datagrams);
    assert_eq!(u(&d["lost"]), 0);
    assert!(d["jitter_ns"].as_f64().is_some(), "{d}");
    // The client's sockets have the buffers fperf asks for.
    assert!(u(&d["rcvbuf"]["granted"]) > 1 << 20, "{d}");
    assert!(u(&s["duration_ns"]) > 0 && u(&c["duration_ns"]) > 0);
}

#[test]
fn a_reverse_udp_run_at_full_speed_reports_its_loss_on_the_client() {
    let server = Server::start(&[]);
    let client = client_ok(
        &server,
        "127.0.0.1",
        &["-u", "--reverse", "-l", "1472", "--time", "1"],
    );
    let report = server.report(1);
    assert!(client.contains("reverse (the server sends)"), "{client}");
    let line = client
        .lines()
        .find(|l| l.starts_with("datagrams"))
        .unwrap_or_else(|| panic!("no datagrams line:\n{client}"));
    let count = |key: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    };
    let (sent, received, lost) = (count("sent="), count("received="), count("lost="));
    // Every datagram the server sent either arrived or is counted lost.
    assert_eq!(
        sent * 1472,
        volume(&report, "sent").bytes,
        "{client}\n{report}"
    );
    assert_eq!(
        received * 1472,
        volume(&client, "received").bytes,
        "{client}"
    );
    assert_eq!(received - count("duplicated=") + lost, sent, "{line}");
    assert!(received > 0, "{line}");
}

#[test]
fn ctrl_c_on_a_receiving_udp_client_ends_both_reports() {
    let server = Server::start(&[]);
    let text = interrupted_client(
        &server,
        &["-u", "--reverse", "-l", "1472", "--time", "60"],
        Duration::from_millis(1000),
        Duration::from_secs(20),
    );
    assert!(text.contains("what was received before Ctrl-C"), "{text}");
    // The server's count of what it sent never reached the client: no loss is claimed.
    assert!(text.contains("sent=unknown"), "{text}");
    let received = volume(&text, "received").bytes;
    let report = server.report(1);
    // Its closed port ended the server's sending; the server still reports it.
    assert!(
        received > 0 && received <= volume(&report, "sent").bytes,
        "{text}\n{report}"
    );
}

/// The host's TCP memory, in bytes (`/proc/net/sockstat`'s `TCP: mem`, in pages).
fn tcp_memory() -> u64 {
    let text = std::fs::read_to_string("/proc/net/sockstat").expect("sockstat");
    let pages: u64 = text
        .lines()
        .find(|l| l.starts_with("TCP:"))
        .and_then(|l| l.split_whitespace().skip_while(|w| *w != "mem").nth(1))
        .and_then(|n| n.parse().ok())
        .expect("TCP: mem");
    // SAFETY: sysconf has no memory effects.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

/// A client with no key asks `server` for a reverse test of 8 streams of 32 sockets,
/// connects them with small receive buffers of its own, and never reads. Returns the host's
/// TCP memory before and at its highest while the test lasts, and how long the server
/// took to end it.
fn reverse_client_that_never_reads(server: &Server) -> (u64, u64, Duration) {
    use fperf::control::{self, Channel, Message, PROTOCOL_MAJOR};
    let before = tcp_memory();
    let t = Duration::from_secs(10);
    let sock = std::net::TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    let mut chan = Channel::new(sock, t).expect("channel");
    chan.send(&Message::Hello {
        version: PROTOCOL_MAJOR,
        software: "test".into(),
        minor: 0,
        features: None,
    })
    .expect("hello");
    let Message::Welcome { session, .. } = chan.recv(t).expect("welcome") else {
        panic!("no welcome")
    };
    let (nstreams, nsockets) = (8, 32);
    let settings = fperf::settings::Settings {
        nstreams,
        nsockets,
        time_ms: Some(60_000),
        workload: fperf::workload::Workload::Reverse,
        ..Default::default()
    };
    chan.send(&Message::Settings { settings })
        .expect("settings");
    assert_eq!(chan.recv(t).expect("ready"), Message::Ready);
    let data: Vec<std::net::TcpStream> = (0..nstreams * nsockets)
        .map(|k| {
            let (stream, socket) = (k / nsockets, k % nsockets);
            let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                .expect("socket");
            // Its own side small, so what the host holds is the server's.
            sock.set_recv_buffer_size(16 << 10).expect("rcvbuf");
            let port = server.port + stream as u16;
            sock.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())
                .expect("data connect");
            let mut sock: std::net::TcpStream = sock.into();
            control::write_frame(
                &mut sock,
                &Message::DataHello {
                    version: PROTOCOL_MAJOR,
                    session,
                    stream,
                    socket,
                },
            )
            .expect("data hello");
            sock
        })
        .collect();
    let started = std::time::Instant::now();
    let mut most = before;
    // The server must give up within its idle time-out (3 s) and close its sockets.
    let ended = loop {
        most = most.max(tcp_memory());
        if server.stderr().contains("no data moved") || started.elapsed() > Duration::from_secs(20)
        {
            break started.elapsed();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(data);
    drop(chan);
    (before, most, ended)
}

/// The kernel's socket buffers count against `--max-memory`: a reverse test whose client
/// never reads makes the host's TCP memory grow by no more than the budget, and ends
/// within the idle time-out; a window past the budget is refused.
#[test]
fn a_reverse_client_that_never_reads_holds_the_kernel_within_the_budget() {
    let server = Server::start(&["--idle-timeout", "3"]);
    let (before, most, ended) = reverse_client_that_never_reads(&server);
    let grew = most.saturating_sub(before);
    eprintln!(
        "TCP memory: {} MiB before, {} MiB at most (+{} MiB); ended after {ended:?}",
        before >> 20,
        most >> 20,
        grew >> 20
    );
    assert!(grew <= 256 * MB, "the host's TCP memory grew by {grew} B");
    assert!(
        ended < Duration::from_secs(8),
        "{ended:?}: {}",
        server.stderr()
    );
    // Without the budget (one far beyond every buffer) the same client takes more.
    let unbounded = Server::start(&["--idle-timeout", "3", "--max-memory", "1000000"]);
    let (before, most, _) = reverse_client_that_never_reads(&unbounded);
    eprintln!(
        "without the kernel's part held to the budget: {} MiB before, {} MiB at most",
        before >> 20,
        most >> 20
    );
    // A window whose buffers alone pass the budget is refused, the budget named.
    let out = client_run(&server, "127.0.0.1", &["-w", "128M", "-m", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("--max-memory"), "{err}");
    assert!(err.contains("socket buffers"), "{err}");
}
