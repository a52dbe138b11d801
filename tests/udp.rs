//! End-to-end UDP runs: a real `fperf -s` and `fperf -c -u` on loopback, asserting both
//! sides' byte and datagram counts. Runs are small enough (at most 16 MB per socket)
//! that the receive buffers fperf asks for hold the whole run, so loopback loses
//! nothing and the counts must match exactly; where that cannot hold (`-l 1`, a
//! million datagrams), the counts must still add up.

mod common;
use common::*;
use regex::Regex;
use std::time::Duration;

const MB: u64 = 1 << 20;

/// The receiver's `datagrams:` line.
#[derive(Debug, PartialEq, Eq)]
struct Received {
    sent: u64,
    received: u64,
    lost: u64,
    duplicated: u64,
    out_of_order: u64,
    jitter: String,
}

fn received_datagrams(text: &str) -> Received {
    let re = Regex::new(
        r"(?m)^datagrams: sent=(\d+)  received=(\d+)  lost=(\d+) \(([\d.]+)%\)  duplicated=(\d+)  out-of-order=(\d+)  jitter=(.+)$",
    )
    .unwrap();
    let c = re
        .captures(text)
        .unwrap_or_else(|| panic!("no receiver 'datagrams' line in:\n{text}"));
    let n = |i: usize| c[i].parse::<u64>().unwrap();
    let r = Received {
        sent: n(1),
        received: n(2),
        lost: n(3),
        duplicated: n(5),
        out_of_order: n(6),
        jitter: c[7].to_string(),
    };
    let pct: f64 = c[4].parse().unwrap();
    let want = if r.sent == 0 {
        0.0
    } else {
        100.0 * r.lost as f64 / r.sent as f64
    };
    assert!((pct - want).abs() < 0.006, "loss % {pct} vs {want}");
    // Truthful accounting: every datagram sent is received once or lost.
    assert_eq!(
        r.received - r.duplicated + r.lost,
        r.sent.max(r.received - r.duplicated),
        "{text}"
    );
    r
}

/// The sender's `datagrams :` line.
fn sent_datagrams(text: &str) -> u64 {
    let re = Regex::new(r"(?m)^datagrams : sent=(\d+)$").unwrap();
    re.captures(text)
        .unwrap_or_else(|| panic!("no sender 'datagrams' line in:\n{text}"))[1]
        .parse()
        .unwrap()
}

fn retries(text: &str) -> u64 {
    let re = Regex::new(r"(?m)^retries   : (\d+)$").unwrap();
    re.captures(text)
        .unwrap_or_else(|| panic!("no 'retries' line in:\n{text}"))[1]
        .parse()
        .unwrap()
}

/// Asserts a lossless run of `datagrams` datagrams and `bytes` bytes on both sides.
fn assert_exact(client: &str, server: &str, bytes: u64, datagrams: u64) {
    assert_eq!(volume(client, "sent").bytes, bytes, "client:\n{client}");
    assert_eq!(volume(server, "received").bytes, bytes, "server:\n{server}");
    assert_eq!(sent_datagrams(client), datagrams, "client:\n{client}");
    let r = received_datagrams(server);
    assert_eq!(
        (r.sent, r.received, r.lost, r.duplicated),
        (datagrams, datagrams, 0, 0),
        "server:\n{server}"
    );
}

#[test]
fn default_size_counts_match_and_the_server_serves_again() {
    let server = Server::start(&[]);
    for n in 1..=2 {
        let c = client_ok(&server, "127.0.0.1", &["-u", "-m", "16"]);
        let s = server.report(n);
        let first = c.lines().next().unwrap();
        let want = format!(
            "UDP CLIENT => 127.0.0.1:{} pkt_size=1472B sync(no-queue) nsockets=1 sched=batch latency=per-batch(64)",
            server.port
        );
        assert_eq!(first, want);
        // Datagrams of 1472 bytes, which a 1500-byte MTU carries whole; the last one short.
        assert_exact(&c, &s, 16 * MB, (16 * MB).div_ceil(1472));
        assert_eq!(
            received_datagrams(&s).out_of_order,
            0,
            "one socket: in order\n{s}"
        );
        assert!(received_datagrams(&s).jitter.ends_with("us"), "{s}");
        assert!(s.contains("\nnew UDP connection from 127.0.0.1:"), "{s}");
        assert!(
            s.contains(". pkt_size(1472B) sched=batch latency=per-batch(64)\n"),
            "{s}"
        );
        latency(&c, "latency");
        latency(&s, "latency");
        assert!(!c.contains("retries"), "no retries line without -r:\n{c}");
    }
    // A TCP test after the UDP ones: the UDP session released everything.
    let c = client_ok(&server, "127.0.0.1", &["-m", "4"]);
    assert_eq!(volume(&c, "sent").bytes, 4 * MB);
}

#[test]
fn four_sockets_send_through_the_mutex_queue() {
    let server = Server::start(&[]);
    let c = client_ok(
        &server,
        "127.0.0.1",
        &["-u", "-l", "32K", "-n", "4", "-m", "16"],
    );
    let s = server.report(1);
    assert!(
        c.lines()
            .next()
            .unwrap()
            .ends_with("async(mutex-queue) nsockets=4 sched=batch"),
        "{c}"
    );
    assert_exact(&c, &s, 16 * MB, 512);
    submit_latency_present(&c);
}

fn submit_latency_present(c: &str) {
    assert!(
        c.lines().any(|l| l.starts_with("lat_submit: avg=")),
        "no lat_submit:\n{c}"
    );
}

#[test]
fn lockfree_queue() {
    let server = Server::start(&[]);
    let c = client_ok(
        &server,
        "127.0.0.1",
        &["-u", "-l", "32K", "-q", "0", "-m", "16"],
    );
    let s = server.report(1);
    assert!(
        c.lines()
            .next()
            .unwrap()
            .ends_with("async(lockfree-queue) nsockets=1 sched=batch"),
        "{c}"
    );
    assert_exact(&c, &s, 16 * MB, 512);
    assert_eq!(received_datagrams(&s).out_of_order, 0, "{s}");
    submit_latency_present(&c);
}

#[test]
fn two_streams_use_consecutive_ports() {
    let server = Server::start(&[]);
    let c = client_ok(
        &server,
        "127.0.0.1",
        &["-u", "-l", "32K", "-t", "2", "-m", "8"],
    );
    let s = server.report(1);
    assert_exact(&c, &s, 16 * MB, 512);
    for k in 0..2u16 {
        let port = server.port + k;
        assert!(
            c.lines()
                .any(|l| l.starts_with(&format!("UDP STREAM {k} 127.0.0.1:"))
                    && l.contains(&format!("=> 127.0.0.1:{port} "))),
            "stream {k} on port {port}:\n{c}"
        );
        assert!(
            s.lines()
                .any(|l| l.starts_with(&format!("UDP STREAM {k} 127.0.0.1:{port} <= 127.0.0.1:"))),
            "{s}"
        );
        assert!(c.contains(&format!("  stream {k} : avg=")), "{c}");
        assert!(s.contains(&format!("  stream {k} : avg=")), "{s}");
    }
    assert!(c.contains("sent: 8MB(0.01GB 8388608B)"), "{c}");
    assert!(s.contains("received: 8MB(0.01GB 8388608B)"), "{s}");
}

#[test]
fn mprtt_acknowledges_every_datagram() {
    let server = Server::start(&[]);
    // 1 MB in 1024-byte datagrams: 1024 round trips. A generous ACK time-out keeps a
    // stalled machine from resending; should it happen, the counts must still agree.
    let c = client_ok(
        &server,
        "127.0.0.1",
        &["-u", "-r", "-m", "1", "-l", "1024", "--ack-timeout", "2000"],
    );
    let s = server.report(1);
    latency(&c, "mprtt");
    latency(&s, "mprtt");
    let retries = retries(&c);
    assert_eq!(volume(&c, "sent").bytes, MB);
    assert_eq!(sent_datagrams(&c), 1024);
    let r = received_datagrams(&s);
    assert_eq!((r.sent, r.lost), (1024, 0), "{s}");
    assert_eq!(
        r.received,
        1024 + retries,
        "every resend reached the server:\n{s}"
    );
    assert_eq!(r.duplicated, retries);
    // The server counts every byte, duplicates included, and ACKs every copy.
    assert_eq!(volume(&s, "received").bytes, (1024 + retries) * 1024);
    assert_eq!(volume(&s, "sent").bytes, 1024 + retries, "{s}");
    let acks = volume(&c, "received").bytes;
    assert!(
        (1024..=1024 + retries).contains(&acks),
        "ACK bytes {acks}\n{c}"
    );
}

#[test]
fn a_response_size_answers_every_datagram_with_one_datagram_of_that_size() {
    let server = Server::start(&[]);
    // A generous ACK time-out keeps a stalled machine from resending.
    let c = client_ok(
        &server,
        "127.0.0.1",
        &[
            "-u",
            "-r",
            "-l",
            "100",
            "--response-size",
            "4096",
            "--transactions",
            "1000",
            "--ack-timeout",
            "2000",
        ],
    );
    let s = server.report(1);
    assert!(c.lines().next().unwrap().contains(" reply=4096B "), "{c}");
    assert!(s.contains(" reply=4096B "), "{s}");
    assert_eq!(retries(&c), 0, "{c}");
    assert_exact(&c, &s, 1000 * 100, 1000);
    assert_eq!(volume(&c, "received").bytes, 1000 * 4096, "{c}");
    assert_eq!(volume(&s, "sent").bytes, 1000 * 4096, "{s}");
    assert!(c.contains("(1000 transactions in "), "{c}");
    latency(&c, "mprtt");
}

#[test]
fn echo_returns_every_datagram_and_times_each_round_trip() {
    let server = Server::start(&[]);
    // Datagrams with the whole header, with the sequence number only, with its low byte.
    for (run, (l, n)) in [(1000u64, 1000u64), (8, 500), (1, 200)]
        .into_iter()
        .enumerate()
    {
        let (size, count) = (l.to_string(), n.to_string());
        let c = client_ok(
            &server,
            "127.0.0.1",
            &[
                "-u",
                "--echo",
                "-l",
                &size,
                "--transactions",
                &count,
                "--ack-timeout",
                "2000",
            ],
        );
        let s = server.report(run + 1);
        assert!(c.lines().next().unwrap().contains(" reply=echo "), "{c}");
        assert_eq!(retries(&c), 0, "{c}");
        assert_exact(&c, &s, n * l, n);
        assert_eq!(
            volume(&c, "received").bytes,
            n * l,
            "every datagram echoed:\n{c}"
        );
        assert_eq!(volume(&s, "sent").bytes, n * l, "{s}");
        assert!(c.contains(&format!("({n} transactions in ")), "{c}");
        let (avg, min, max) = latency(&c, "mprtt");
        assert!(min <= avg && avg <= max, "{c}");
    }
}

#[test]
fn one_byte_datagrams() {
    let server = Server::start(&[]);
    let c = client_ok(&server, "127.0.0.1", &["-u", "-l", "1", "-m", "1"]);
    let s = server.report(1);
    assert!(c.lines().next().unwrap().contains("pkt_size=1B"), "{c}");
    assert_eq!(volume(&c, "sent").bytes, MB);
    assert_eq!(sent_datagrams(&c), MB);
    let r = received_datagrams(&s);
    assert_eq!(r.sent, MB, "{s}");
    // A million datagrams do not fit in a socket buffer: loopback may drop some if the
    // receiver falls behind, but every byte received is one datagram.
    assert_eq!(volume(&s, "received").bytes, r.received, "{s}");
    assert!(r.received > 0);
    assert!(
        r.jitter.starts_with("n/a"),
        "1-byte datagrams carry no send time:\n{s}"
    );
}

#[test]
fn largest_ipv4_datagram() {
    let server = Server::start(&[]);
    let c = client_ok(&server, "127.0.0.1", &["-u", "-l", "65507", "-m", "16"]);
    let s = server.report(1);
    // 16 MB = 256 full datagrams of 65507 B and one of 256 B.
    assert_exact(&c, &s, 16 * MB, 257);
}

#[test]
fn ipv6_with_the_largest_ipv6_datagram() {
    let server = Server::start(&[]);
    let c = client_ok(&server, "::1", &["-u", "-l", "65527", "-m", "16"]);
    let s = server.report(1);
    assert!(
        c.lines().next().unwrap().starts_with(&format!(
            "UDP CLIENT => [::1]:{} pkt_size=65527B",
            server.port
        )),
        "{c}"
    );
    assert!(s.contains("\nnew UDP connection from [::1]:"), "{s}");
    assert_exact(&c, &s, 16 * MB, 257);
}

#[test]
fn oversized_datagrams_are_refused_before_the_run() {
    let server = Server::start(&[]);
    let port = server.port.to_string();
    for (host, size, needle) in [
        ("127.0.0.1", "65508", "over IPv4 (at most 65507 bytes)"),
        ("::1", "65528", "does not fit in one UDP datagram"),
    ] {
        let out = run(
            &["-c", host, "-p", &port, "-u", "-l", size],
            Duration::from_secs(20),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{err}");
    }
    // Nothing reached the server.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(server.stdout().matches("Server listening").count(), 1);
}

#[test]
fn the_senders_rate_covers_its_sending_time_and_the_drain_is_reported_apart() {
    let server = Server::start(&[]);
    // Batches of 32 datagrams into an 8 KB receive buffer: most are dropped, so the
    // server waits out its quiet time (300 ms) before confirming, a wait that must not
    // count as sending time.
    let args = [
        "-u",
        "-l",
        "32K",
        "-b",
        "200M",
        "-m",
        "8",
        "-w",
        "8K",
        "--udp-batch",
        "32",
    ];
    let mut json = args.to_vec();
    json.push("--json");
    let out = client_ok(&server, "127.0.0.1", &json);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    let (c, s) = (&doc["client"]["total"], &doc["server"]["total"]);
    let lost = s["datagrams"]["lost"].as_u64().expect("lost");
    assert!(lost > 0, "nothing lost, nothing to wait for: {s:#}");
    let rate = c["sent_bits_per_second"].as_f64().expect("rate");
    assert!(
        (rate / 200e6 - 1.0).abs() < 0.02,
        "sent at {rate} bit/s, asked for 200 Mbit/s: {c:#}"
    );
    let drain = c["drain_ns"].as_u64().expect("drain_ns");
    assert!(
        (200_000_000..3_500_000_000).contains(&drain),
        "drain {drain} ns after a loss: {c:#}"
    );
    assert!(s["drain_ns"].is_null(), "a receiver has no drain: {s:#}");
    // The text report says it on its own line.
    let text = client_ok(&server, "127.0.0.1", &args);
    let line = Regex::new(
        r"(?m)^drain     : (\d+\.\d\d)s from the last send to the server's confirmation \(not in the sent time\)$",
    )
    .unwrap();
    let secs: f64 = line
        .captures(&text)
        .unwrap_or_else(|| panic!("no drain line:\n{text}"))[1]
        .parse()
        .unwrap();
    assert!(secs >= 0.2, "{text}");
    let sent = volume(&text, "sent");
    assert!(sent.secs < 0.4, "8 MB at 200 Mbit/s takes 0.34 s:\n{text}");
}

#[test]
fn a_server_that_stops_acknowledging_fails_the_run_naming_the_time_waited() {
    let server = Server::start(&[]);
    let port = server.port.to_string();
    let pid = server.pid() as libc::pid_t;
    let args = [
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "-u",
        "-r",
        "-l",
        "32K",
        "--ack-timeout",
        "50",
        "--time",
        "20",
    ];
    let out = run_with(&args, Duration::from_secs(30), |_| {
        server.wait_for(
            |o| o.contains("new UDP connection"),
            Duration::from_secs(10),
        );
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: kill() on the server child's pid, which lives until `server` drops.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
    });
    // SAFETY: as above; it must run again to be stopped for good when `server` drops.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // Eleven sends of the packet, 50 ms apart: about 0.55 s, never the 10 s stall time
    // the client gives a silent TCP connection.
    let re = Regex::new(
        r"the server stopped answering: the server or the network is gone \(stream 0: UDP stream 0: packet seq=\d+ \(32768 bytes\) was not acknowledged in (\d+\.\d\d)s \(sent 11 times, waiting 50 ms for its ACK each time: --ack-timeout\)\)",
    )
    .unwrap();
    let waited: f64 = re.captures(&err).unwrap_or_else(|| panic!("{err}"))[1]
        .parse()
        .unwrap();
    assert!((0.55..2.0).contains(&waited), "{err}");
    assert!(!err.contains("10s"), "{err}");
}

#[test]
fn a_warm_ups_datagrams_are_left_out_of_what_was_sent_and_lost_on_both_ends() {
    // 50 Mbit/s of 1000-byte datagrams for 3 s, the first left out (--omit 1): some
    // 12500 datagrams counted on each end, not the 18750 of the whole test.
    for reverse in [false, true] {
        let mut args = vec![
            "-u", "-b", "50M", "-l", "1000", "--time", "3", "--omit", "1",
        ];
        if reverse {
            args.push("--reverse");
        }
        let doc = run_json(&args);
        let (sender, receiver) = if reverse {
            ("server", "client")
        } else {
            ("client", "server")
        };
        let d = |side: &str, key: &str| json_u64(&doc, &[side, "total", "datagrams", key]);
        let (sent, peer_sent) = (d(sender, "sent"), d(receiver, "peer_sent"));
        assert!(
            (11_000..=13_500).contains(&sent),
            "reverse {reverse}: {doc}"
        );
        // Each end ends the warm-up on its own clock: datagrams in flight then may be
        // counted by one end and not the other (5% leaves room for a slow start).
        assert!(sent.abs_diff(peer_sent) <= 600, "reverse {reverse}: {doc}");
        let (received, lost) = (d(receiver, "received"), d(receiver, "lost"));
        assert_eq!(received + lost, peer_sent, "reverse {reverse}: {doc}");
    }
}

#[test]
fn a_receivers_intervals_count_what_was_sent_and_lost_in_each_and_add_up_to_the_totals() {
    // A small receive buffer at 200 Mbit/s: loss is likely, though not certain.
    let doc = run_json(&[
        "-u", "-b", "200M", "-l", "1000", "-w", "16K", "--time", "2", "-i", "0.5",
    ]);
    let total = &doc["server"]["total"]["datagrams"];
    let intervals = doc["server"]["intervals"].as_array().expect("intervals");
    assert_eq!(intervals.len(), 4, "{doc}");
    let (mut sent, mut lost) = (0, 0);
    for iv in intervals {
        let d = |key: &str| json_u64(iv, &["total", "datagrams", key]);
        // Half a second at 200 Mbit/s: some 12500 datagrams each, not 0 and then all.
        assert!((1_000..=25_000).contains(&d("peer_sent")), "{iv}");
        assert!(d("received") + d("lost") >= d("peer_sent"), "{iv}");
        sent += d("peer_sent");
        lost += d("lost");
    }
    assert_eq!(sent, json_u64(total, &["peer_sent"]), "{doc}");
    assert_eq!(lost, json_u64(total, &["lost"]), "{doc}");

    // The text lines say it too, on the receiving end only.
    let out = run(
        &[
            "--loopback",
            "-u",
            "-b",
            "50M",
            "-l",
            "1000",
            "--time",
            "1",
            "-i",
            "0.5",
        ],
        Duration::from_secs(20),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('[')).collect();
    let receiving: Vec<&&str> = lines.iter().filter(|l| l.contains("received:")).collect();
    assert_eq!(receiving.len(), 2, "{text}");
    for line in &receiving {
        assert!(
            line.contains("  lost: 0/") && line.contains("  jitter: "),
            "{text}"
        );
    }
    assert!(
        lines
            .iter()
            .all(|l| l.contains("received:") || !l.contains("lost:")),
        "{text}"
    );
}

/// A UDP test's socket buffers count in the server's `--max-memory`: past its budget the
/// server holds each socket's buffer to an equal share, where it would have taken its
/// own 16 MiB (which the kernel doubles) on every socket.
#[test]
fn a_udp_tests_socket_buffers_are_held_within_the_servers_memory_budget() {
    let granted = |server: &Server| -> u64 {
        let out = client_ok(
            server,
            "127.0.0.1",
            &[
                "-u", "-t", "4", "-l", "1400", "--time", "0.5", "-b", "20M", "--json",
            ],
        );
        let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        doc["server"]["total"]["datagrams"]["rcvbuf"]["granted"]
            .as_u64()
            .unwrap_or_else(|| panic!("the server's receive buffer: {doc:#}"))
    };
    // 4 sockets x 32 MiB fit the default budget of 256 MiB: each gets its own 16 MiB.
    let roomy = Server::start(&[]);
    assert_eq!(granted(&roomy), 16 << 20);
    // Within 64 MiB they share what the test's own buffers leave: under 8 MiB each.
    let tight = Server::start(&["--max-memory", "64"]);
    let share = granted(&tight);
    assert!(
        share >= 1 << 20 && 4 * 2 * share <= 64 << 20,
        "each socket's buffer {share} B"
    );
}
